"""What a person reads: terminal tables, trial lines, summaries, the files a run writes."""
