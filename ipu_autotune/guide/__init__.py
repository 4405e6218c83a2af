"""The guide: estimator-guided proposals, warm starts, corrections and bets."""
