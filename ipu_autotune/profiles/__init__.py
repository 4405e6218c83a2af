"""A model's profile: per-unit costs traced for a Problem, and where splits and checkpoints land
among its units."""
