"""Harmony (Bao, Peng, Wu, INFOCOM 2019): a speed-prediction model and a learned, interference-aware placer."""
