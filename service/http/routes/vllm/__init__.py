"""vLLM's pooling API: /pooling, /score, and vLLM's bodies on the paths it shares with other peers."""
