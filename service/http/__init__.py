"""The HTTP face: routes, request and response bodies, middleware, body parsing off the event
loop, and uvicorn's transport limits. Nothing here imports torch or ``models``; routes reach
the models through one engine call (:mod:`service.engine.engine.engine`)."""
