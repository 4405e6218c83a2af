"""The subcommands, one module each (`tune`, `estimate`, `export`, `show`, `studies`, `numerics`,
`report`, ...): each a thin `run(options)` from the command's options (options/table.py) to library
calls. `cli` parses the arguments into them and calls `commands.<name>.run`; `common` holds what
several share. Nothing below the command layer imports this package."""
