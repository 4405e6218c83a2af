"""A model's profile: per-unit costs traced for a Problem; where splits and checkpoints land."""
