"""HTTP routes, one module per area. Routes validate, enqueue and await; they never touch torch."""
