"""How control reaches hosts and agents: pooled SSH connections and their port forwards
(:mod:`.ssh`, :mod:`.portforward`, ``~/.ssh/config`` through :mod:`.sshconfig`), and the typed
clients of the shim and the runner (:mod:`.agents` the interfaces, :mod:`.httpagents` over
HTTP)."""
