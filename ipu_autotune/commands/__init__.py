"""The subcommands, one module each (`tune`, `estimate`, `export`, `show`, `studies`,
`numerics`, `report`): each a thin `run(args)` from parsed arguments to library calls.
`cli` parses the arguments and calls `commands.<name>.run`; `common` holds what several share.
Nothing below the command layer imports this package."""
