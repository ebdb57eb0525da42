"""Model folders and checkpoints: reading what sentence-transformers and transformers save."""
