"""``resurrect liveness-key NODE``: the key of one node's agent, derived from the master key.

Run it where the master key is (the collector's host, ``liveness.key_file``), once per node;
put the result on that node only, as ``agent.collector_key_file`` (mode 0600, owned by the
agent's user). An agent's key speaks for its own node alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from resurrect.command_line import add_config_arg
from resurrect.config import load_config
from resurrect.errors import ConfigError
from resurrect.sensors.liveness.wire import load_key, node_key


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a new file of mode 0600 (replacing one already there)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write {temporary}: {exc.strerror}") from exc
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def _liveness_key(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    master = load_key(config.liveness.key_file)
    key = node_key(master, config.cluster.name, args.node) + b"\n"
    if args.out is None:
        sys.stdout.write(key.decode())
        return 0
    write_private(args.out, key)
    print(f"{args.out}: the liveness key of node {args.node} (cluster {config.cluster.name})")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "liveness-key", help="derive one node agent's liveness key from the master key"
    )
    add_config_arg(parser)
    parser.add_argument("node", metavar="NODE", help="the node's name, as its agent reports it")
    parser.add_argument("--out", type=Path, default=None, help="write it here (mode 0600)")
    parser.set_defaults(handler=_liveness_key)
