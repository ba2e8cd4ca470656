"""The WARC record that stores a rendered DOM: a `conversion` record referring to the untouched response.

Why `conversion` and not `resource` (WARC 1.1 §6.7, §6.8): a `resource` is content obtained directly, without a
protocol exchange to record; a `conversion` is "an alternative version of content that was transformed from
the original" and names that original with WARC-Refers-To.  A rendered DOM is exactly that: computed by a
browser from the response we stored (plus its sub-resources), not something any server sent.  Common Crawl's
WET text records are `conversion` records for the same reason.  The render's metadata rides in extension
fields of the same record (WARC 1.1 §5 allows them), so a reader never has to join a second record.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from io import BytesIO

RENDERED_DOM_META_KEY = "weblm_rendered_dom"  # request.meta: the RenderedDom the WARC capture writes with the fetch
RENDER_FIELD_PREFIX = "WARC-X-Render-"   # extension fields: WARC-X-Render-Ms, -Subrequests, -Subrequest-Bytes, ...


@dataclass(frozen=True)
class RenderedDom:
    html: bytes                    # the serialised DOM, UTF-8
    fields: dict[str, str] = field(default_factory=dict)   # render metadata: Ms, Subrequests, Subrequest-Bytes, ...


def conversion_record(builder, url: str, refers_to: str, date: str, dom: RenderedDom):
    """Build the record with warcio's builder (it computes WARC-Block-Digest and WARC-Payload-Digest)."""
    headers = {"WARC-Date": date, "WARC-Refers-To": refers_to}
    headers.update({RENDER_FIELD_PREFIX + name: " ".join(str(value).split()) for name, value in dom.fields.items()})
    return builder.create_warc_record(url, "conversion", payload=BytesIO(dom.html), length=len(dom.html),
                                      warc_content_type="text/html; charset=utf-8", warc_headers_dict=headers)
