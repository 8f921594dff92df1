"""MiniCPM-o 4.5 end to end: the checkpoint's own code listens and thinks, our Token2Wav speaks.

``family`` is the face (``adapters.registry`` key ``minicpmo45``); ``folder`` checks a checkpoint
folder torch-free; ``loader`` runs the folder's code (local files, bf16, vision off); ``backbone``
drives its duplex object and takes its speech tokens; ``windows`` cuts them as its code does.
"""
