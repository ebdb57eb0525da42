"""Quality measurement: how close each attention backend comes to exact attention, per model kind."""
