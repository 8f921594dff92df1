"""DuplexCadence: exact state and execution from a speech model's declared timelines.

The runtime is model-agnostic: an adapter *declares* its clocks, regions, retention, constants and
effects (:mod:`engine.contract`); the plan derives extents, bounds and the signature catalog from
that declaration alone (:mod:`engine.plan`); the state rule holds retained caches as carries at one
address (:mod:`engine.carry`); the compute rule replays one CUDA graph per catalog signature
(:mod:`engine.replay`); arms combine the two (:mod:`engine.arms`).

Nothing here imports Qt or any model family.
"""
