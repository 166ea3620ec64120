"""Image pull with progress and a stall timeout (docker SDK low-level stream).

The timeout fires when the pull stops making progress, not after a fixed wall time: the
stream's socket read timeout catches a daemon that sends nothing, and a progress clock catches
a daemon that keeps talking ("Retrying in 5 seconds") without moving bytes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.auth import encode_header
from docker.utils import parse_repository_tag

from tcl.shim.errors import ImageError


def pull_image(
    api: Any,
    image: str,
    auth: dict[str, str] | None,
    stall_timeout_s: float,
    progress: Callable[[float], None],
    cancel: threading.Event,
) -> None:
    """Pull ``image`` through ``api`` (an APIClient whose timeout is the stall timeout)."""
    repo, tag = parse_repository_tag(image)
    layers: dict[str, tuple[int, int]] = {}  # id -> (current, total)
    last_done = -1
    last_progress_at = time.monotonic()
    last_status: dict[str, str] = {}
    reported = 0.0
    try:
        for event in _pull_stream(api, repo, tag or "latest", auth, stall_timeout_s):
            if cancel.is_set():
                raise ImageError(f"pull of {image} cancelled")
            if "error" in event:
                raise ImageError(f"pull of {image} failed: {event['error']}")
            layer = str(event.get("id", ""))
            status = str(event.get("status", ""))
            detail = event.get("progressDetail") or {}
            moved = last_status.get(layer) != status
            last_status[layer] = status
            if layer and detail.get("total"):
                layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
            elif layer and status in ("Pull complete", "Already exists", "Download complete"):
                _, total = layers.get(layer, (0, 0))
                layers[layer] = (total, total)
            done = sum(c for c, _ in layers.values())
            total = sum(t for _, t in layers.values())
            if done > last_done or (moved and not status.startswith("Retrying")):
                last_done = max(done, last_done)
                last_progress_at = time.monotonic()
            elif time.monotonic() - last_progress_at > stall_timeout_s:
                raise ImageError(f"pull of {image} made no progress for {stall_timeout_s:g} s")
            if total:  # layer sizes become known one by one: never report going backwards
                reported = max(reported, min(done / total, 1.0))
                progress(reported)
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as e:
        if isinstance(e, requests.exceptions.ReadTimeout) or "timed out" in str(e).lower():
            raise ImageError(f"pull of {image} made no progress for {stall_timeout_s:g} s") from e
        raise ImageError(f"pull of {image}: cannot reach the docker daemon: {e}") from e
    except docker.errors.NotFound as e:
        raise ImageError(f"image {image} not found: {e.explanation or e}") from e
    except docker.errors.APIError as e:
        raise ImageError(f"pull of {image} failed: {e.explanation or e}") from e
    progress(1.0)


def _pull_stream(
    api: Any, repo: str, tag: str, auth: dict[str, str] | None, read_timeout_s: float
) -> Iterator[dict[str, Any]]:
    """POST /images/create and yield its JSON lines. docker-py's own ``pull`` disables the read
    timeout, so the request is made here with the stall timeout as its per-read timeout."""
    headers = {"X-Registry-Auth": encode_header(auth)} if auth else {}
    url = f"{api.base_url}/v{api.api_version}/images/create"
    with api.post(
        url,
        params={"fromImage": repo, "tag": tag},
        headers=headers,
        stream=True,
        timeout=(read_timeout_s, read_timeout_s),
    ) as resp:
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            if resp.status_code == 404:
                raise docker.errors.NotFound(message, response=resp, explanation=message)
            raise docker.errors.APIError(message, response=resp, explanation=message)
        for line in resp.iter_lines():
            if line.strip():
                yield json.loads(line)
