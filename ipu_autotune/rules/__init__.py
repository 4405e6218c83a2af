"""What a config may be: every cross-field rule, and what optimum-graphcore can train."""
