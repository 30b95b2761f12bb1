"""`tenure chaos`: faults at random against real workers, and the figures that must hold."""
