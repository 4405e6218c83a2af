"""`verify`: does the tuned recipe still train? The baseline's and the tuned configuration's
recipes (as the export writes them) trained side by side on the CPU on the user's data, with the
IPU's FP16 numerics emulated, and a verdict against the baseline's seed-to-seed band.

One module per idea: `emulation` (FP16 rounding and its counts), `recipe`, `samples`, `run`,
`verdict`, `check` (the three runs from two configs), `defaults` (what the CLI's options need
without torch). Nothing here reads command-line arguments (that is `commands/verify.py`), and
nothing is imported here: the package is imported by every command's options, most of which
never train anything (torch alone is 2 s of CPU). docs/verify.md.
"""
