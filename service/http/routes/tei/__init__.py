"""text-embeddings-inference's own surface: its routes beyond the shared ones, health, truncation default, sparse embeddings."""
