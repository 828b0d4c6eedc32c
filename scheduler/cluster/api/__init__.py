"""The clusters' API: registered clusters for the platform team (`/api/v1/clusters/`)."""
