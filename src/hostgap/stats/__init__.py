"""The statistics measurement and comparisons share: the differencing estimator, confidence
intervals of slopes and their combinations (Theil-Sen with Sen's interval, MOVER, paired ratios),
the batch-means interval over rounds, and the machine's noise readings and model."""
