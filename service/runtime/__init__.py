"""Running the app: one uvicorn server with its signal handling, several under a supervisor, or
replicas on Ray Serve."""
