"""``attnserve evaluate`` for forecasters: test metrics per backend and the results table."""
