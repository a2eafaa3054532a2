"""Pagination helper used by the listing endpoints."""


def paginate(items, page, per_page=10):
    """Return one page of ``items``.

    Pages are numbered from 1. ``total_pages`` is the number of pages needed to
    show every item (an empty list still has exactly 1, empty, page). The
    result is a dict::

        {"items": [...], "page": page, "total_pages": n, "has_next": bool}

    ``has_next`` is True when a page after ``page`` exists.
    Raises ValueError if ``per_page < 1`` or ``page`` is not in 1..total_pages.
    """
    if per_page < 1:
        raise ValueError("per_page must be >= 1")
    total_pages = max(1, len(items) // per_page)
    if page < 1 or page > total_pages:
        raise ValueError(f"page {page} out of range 1..{total_pages}")
    start = page * per_page
    return {
        "items": items[start:start + per_page],
        "page": page,
        "total_pages": total_pages,
        "has_next": page < total_pages,
    }
