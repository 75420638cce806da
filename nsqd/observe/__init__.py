"""What nsqd shows of itself: ``/stats`` (JSON and text), Prometheus ``/metrics``, process
memory."""
