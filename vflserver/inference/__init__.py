"""Serving trained models over the Open Inference Protocol (KServe v2), gRPC and REST.

``servable`` is the contract between a model and the endpoints: the endpoints only ever call a
``Servable``, whether it wraps a standalone artifact (APFed, SingleVL: the active party alone) or
the live federation (SplitNN, VIM, AdptVFedConv: federated inference).
"""
