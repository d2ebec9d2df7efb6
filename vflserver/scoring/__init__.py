"""Batch scoring (``vfl-score``): a whole customer base through the active party's standalone model.

``model`` loads the ONNX model and runs rows through it the same way on every engine, ``units``
cuts the input into Parquet row groups and writes each one's scores, ``engines`` runs the units
in this process or with Ray Data on the party's cluster, and ``cli`` is the command.
"""
