"""Dynamic Offers: Ray Serve ensemble service."""
