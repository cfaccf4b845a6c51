"""
kafkatw: the distributed messaging system of the Kafka paper (Kreps, Narkhede, Rao,
NetDB 2011) in Python on Twisted, speaking the Apache Kafka wire protocol.
"""

from ._version import __version__

__all__ = ["__version__"]
