"""MiniCPM-o 4.5 / Step-Audio2 Token2Wav (CosyVoice2 lineage): flow decoder and HiFT vocoder.

Our own implementation, checkpoint-compatible with the vendor's ``flow.pt`` / ``hift_original.pt``
and equal to the vendor's code bit for bit on the stock (eager) path:

- ``checkpoint``: load a checkpoint folder, or build the architecture with seeded random weights;
- ``flow``, ``encoder``, ``conformer``, ``dit``, ``cfm``: the flow model;
- ``binding``: every number the streams read, from the declaration and its plan (retention,
  the carry's capacity, call sizes, the catalog's call classes);
- ``stock``: the vendor's streaming semantics (the eager arm's state);
- ``states``: the two state disciplines behind one protocol (the stock state, the state rule's
  carry and conv region); ``chunks``: the flow chunk over either, as functions of tensors;
- ``catalogs``, ``operators``: the replayed operators' signatures and their registration;
- ``stream``: the flow stream under every arm, switchable between calls;
- ``hift``, ``f0``, ``nsf``, ``istft``, ``vocoder_stream``, ``speech``: the original HiFT vocoder,
  streamed, and tokens to PCM;
- ``prompt``: the voice prompt; ``warmup``, ``audit_mode``, ``family``: the family's face.
"""
