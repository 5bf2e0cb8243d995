"""The `leviathan` commands: `leviathan <name>` is `leviathan/commands/<name>.py`.

Each module exposes `register(subparsers)`, adding its subcommand with `set_defaults(func=...)`;
`func(args)` returns the process exit code. The modules parse arguments and call the packages
(model, data, train, eval, export, workflow, report), where the logic lives and is tested.
"""

# `leviathan --help` lists them in this order: the pipeline's own order.
COMMANDS = (
    "params",
    "data",
    "train",
    "status",
    "eval",
    "generate",
    "export",
    "target",
    "retrain",
    "config",
    "preflight",
    "report",
    "audit",
)
