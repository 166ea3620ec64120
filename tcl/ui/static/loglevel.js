// A log line's level, read from the line itself, never from its stream (tcl.jobs, absl and
// most libraries log to stderr): Python logging's level names ("INFO:root:…",
// "2025-11-28 10:00:00,001 WARNING name …"), absl's "I1128 10:00:00.1 …" prefixes, the
// warnings module's "file.py:12: UserWarning: …", "error: …", and a traceback from
// "Traceback (most recent call last):" to its exception line. A line naming no level is plain
// (""). Levels: "debug", "info", "warning", "error".

const NAMES = { DEBUG: "debug", INFO: "info", WARNING: "warning", WARN: "warning",
  ERROR: "error", CRITICAL: "error", FATAL: "error" };
const ABSL = /^([DIWEF])\d{4} \d\d:\d\d:\d\d/;
const ABSL_LEVEL = { D: "debug", I: "info", W: "warning", E: "error", F: "error" };
const STAMP = /^[\d\s:.,+\-T/Z[\]|()]*/; // a timestamp before the level, if any
const SEP = /[\s:|[\]]+/;
const PY_WARNING = /:\d+: [A-Z]\w*Warning: /;
const LOWER = /^(error|fatal|warning)(:|\b)/;
const TRACE = /^(Traceback \(most recent call last\):|During handling of the above exception|The above exception was the direct cause)/;

export function levelOf(line) {
  const absl = ABSL.exec(line);
  if (absl) return ABSL_LEVEL[absl[1]];
  // the level is the first or second word after the timestamp ("INFO name", "name INFO")
  const words = line.replace(STAMP, "").split(SEP).filter((w) => w && w !== "-").slice(0, 2);
  for (const w of words) if (NAMES[w]) return NAMES[w];
  if (PY_WARNING.test(line)) return "warning";
  const lower = LOWER.exec(line);
  if (lower) return lower[1] === "warning" ? "warning" : "error";
  return "";
}

// Lines of one log, in order: a traceback's frames (indented) and its exception line are
// errors too. One reader per log; its nodes' tracebacks are followed apart.
export class LevelReader {
  constructor() { this.tracing = new Set(); }

  level(node, line) {
    if (TRACE.test(line)) { this.tracing.add(node); return "error"; }
    if (this.tracing.has(node)) {
      if (line === "" || /^\s/.test(line)) return "error"; // its frames and their source
      this.tracing.delete(node); // the exception line ends it
      return "error";
    }
    return levelOf(line);
  }
}
