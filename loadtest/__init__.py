"""Load tests for attnserve (locust workload, headless runner, CI smoke run)."""
