"""Published weights in other layouts, as this project's parameters.

Each layout module turns the tensors of a published file (name -> array, as
its format names them) into this project's flat parameter paths
('params/encoderblock_0/attention/query/kernel', 'batch_stats/...'), and
(big_vision, timm) back for --mode=export: pure numpy, no devices. trainer/init_weights.py reads the file, checks that every
parameter is filled once and every tensor used or named as ignored, and
places the arrays on the run's shardings.
"""
