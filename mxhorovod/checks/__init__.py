"""Cross-rank checks that turn a silent divergence or a hang into an error or a warning on
every rank: fresh gradients and AMP overflow (agreement), batch sizes (batch_check), the
parameters each rank reduces (layout_check), and updates without a reduction (unreduced).

Used by training/; sits below it and imports only collectives/ and common/.
"""
