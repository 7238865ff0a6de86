"""A real Iceberg REST catalog for the tests and drills (:mod:`lab.rest_catalog.server`):
Iceberg's REST servlet over a JDBC catalog on PostgreSQL, the warehouse on S3, OAuth2
client credentials on, fault hooks on commit requests."""

from lab.rest_catalog.server import (
    REST_CATALOG_SET,
    Fault,
    OAuthClient,
    ObjectStore,
    RestCatalogServer,
    RestCatalogStartError,
    TokenPolicy,
    launcher_classes,
    start_rest_catalog,
)

__all__ = [
    "REST_CATALOG_SET",
    "Fault",
    "OAuthClient",
    "ObjectStore",
    "RestCatalogServer",
    "RestCatalogStartError",
    "TokenPolicy",
    "launcher_classes",
    "start_rest_catalog",
]
