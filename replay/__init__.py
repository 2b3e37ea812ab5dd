"""``cascade replay``: send a labelled prompt set through a running gateway, check what its policy promised.

Above collection (it renders and grades questions as ``cascade collect`` does, and appends to a
runs-format file) and calibration (its HTML report uses calibration's report writer); nothing
imports it but the root CLI.
"""
