"""Warm standby: the lease (``replica``) and the liveness link that speeds take-overs
(``liveness``)."""

from pipeline.standby.replica import Standby

__all__ = ["Standby"]
