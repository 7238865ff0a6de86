"""The running driver, one job per module; ``composition`` builds them and
:class:`pipeline.app.Pipeline` runs them.

* ``composition``      -- the driver's parts built from a config (``compose``), and the
                          checks made before any of them exists (``check_locally``);

* ``checkpoint_probe`` -- proves the checkpoint location usable before any side effect;
* ``source_settings``  -- the broker check, the source's options, offsets it starts from;
* ``stats``            -- the run's totals (``RunStats``);
* ``fencing``          -- the one path by which a fenced driver stops (``FenceGuard``);
* ``stopping``         -- graceful stop: the batch gate and stopping between batches;
* ``batches``          -- one micro-batch through the coordinator (``BatchRunner``);
* ``telemetry``        -- metrics and the batch log attached as observers, the run info;
* ``warm_standby``     -- the standby lease: acquire (warm-up, rehearsal), keep, release;
* ``streams``          -- the Spark session handle and the streaming queries it starts.
"""
