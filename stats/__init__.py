"""Statistics shared by calibration, recalibration and replay: paired percentile bootstrap intervals.

Imports no other package of the project.
"""
