"""Load tests: game-server login traffic against one Serve application (locust)."""
