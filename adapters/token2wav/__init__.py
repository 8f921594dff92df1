"""MiniCPM-o 4.5 / Step-Audio2 Token2Wav (CosyVoice2 lineage): flow decoder and HiFT vocoder.

Our own implementation, checkpoint-compatible with the vendor's ``flow.pt`` / ``hift_original.pt``
and equal to the vendor's code bit for bit on the stock (eager) path:

- ``checkpoint``: load a checkpoint folder, or build the architecture with seeded random weights;
- ``flow``, ``encoder``, ``conformer``, ``dit``, ``cfm``: the flow model;
- ``stock``: the vendor's streaming semantics (the eager arm);
- ``chunks``, ``stream``: the flow chunk under every arm (state rule, ExactShapeReplay);
- ``binding``: the declaration's catalog as the streams' call classes;
- ``hift``, ``f0``, ``nsf``, ``istft``, ``vocoder_stream``: the original HiFT vocoder, streamed.
"""
