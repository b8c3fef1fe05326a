"""Training side of dynamic offers: synthetic players, offer catalogs and ensemble members."""
