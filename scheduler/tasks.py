# Reconcile tasks arrive with the reconciler (issue 4).
