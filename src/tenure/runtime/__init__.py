"""The worker runtime: job runs, their context, the lease keeper and the worker."""
