"""GreenOps host agent: samples GPU power, energy and utilisation and ships it to the server.

The package imports nothing outside the standard library at import time; pynvml is
imported lazily by :class:`collectors.sources.NvmlSource` so that ``--help``,
``version`` and ``--simulate`` work on hosts without an NVIDIA driver.
"""

__version__ = "0.1.0"
