#!/usr/bin/python3
"""Writes OUT.npy: f16 values with the hard cases (NaN with quiet and
signaling payloads of both signs, +-inf, -0, subnormals, max and lowest)
among random ones, for f16-bool.test."""
import sys

import numpy as np

rng = np.random.default_rng(9)
x = (rng.standard_normal(3000) * 50).astype(np.float16)
bits = x.view(np.uint16)
special = np.array([0x7E00, 0x7E01, 0xFE23, 0x7C01, 0xFC02, 0x7C00, 0xFC00,
                    0x8000, 0x0000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF],
                   dtype=np.uint16)
at = rng.random(bits.shape) < 0.2
bits[at] = rng.choice(special, at.sum())
np.save(sys.argv[1], x)
