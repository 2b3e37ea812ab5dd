"""Reports of calibration and evaluation: one self-contained HTML page, PNG plots, terminal tables."""
