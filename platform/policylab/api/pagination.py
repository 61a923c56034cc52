"""Paging of the API's lists, bounded so that no query string reaches the database as a huge LIMIT."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination

from policylab.ids import MAX_ID


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset paging with `limit` capped at `max_limit` (DRF caps it only when set; without
    a cap, `?limit=2**63` made SQLite fail with "datatype mismatch": a 500). An offset past the end is
    already an empty page: DRF compares it with the count before querying."""

    max_limit = 500

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: (1, self.max_limit), self.offset_query_param: (0, MAX_ID)}
        for parameter in parameters:
            low, high = bounds[parameter["name"]]
            parameter["schema"] |= {"minimum": low, "maximum": high}
        return parameters
