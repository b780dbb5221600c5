"""rackscale: operator software that makes many GPU racks behave as one machine."""

__version__ = "0.1.0"
