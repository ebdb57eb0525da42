"""The GPU check (``make gpu-check``, ``make gpu-check-dry``): install, environment, tests/gpu,
attention kernels beside FlashAttention-2's published figures, and the service under load, on a
bare offline GPU machine within 8 minutes, into one report (see ``__main__``)."""
