/** Pagination headers of a page at `skip`/`limit` out of `total` records. */
export interface PageHeaders {
  'X-Total-Count': number;
  'X-Per-Page': number;
  'X-Current-Page': number;
  'X-Page-Count': number;
  Link?: string;
}

/**
 * X-Total-Count, X-Per-Page, X-Current-Page, X-Page-Count and an RFC 8288 `Link` with the first,
 * prev, next and last pages that exist (none when nothing matches). Links keep the request's path
 * and its other query parameters; `requestUrl` is the URL as received (path and query).
 */
export function pageHeaders(requestUrl: string, skip: number, limit: number, total: number): PageHeaders {
  const pageCount = Math.ceil(total / limit);
  const headers: PageHeaders = {
    'X-Total-Count': total,
    'X-Per-Page': limit,
    'X-Current-Page': Math.floor(skip / limit) + 1,
    'X-Page-Count': pageCount,
  };
  if (total === 0) return headers;

  const url = new URL(requestUrl, 'http://placeholder');
  const link = (rel: string, at: number) => {
    const params = new URLSearchParams(url.searchParams);
    params.delete('skip');
    params.delete('limit');
    params.set('skip', String(at));
    params.set('limit', String(limit));
    return `<${url.pathname}?${params.toString()}>; rel="${rel}"`;
  };
  const lastSkip = (pageCount - 1) * limit;
  const links = [link('first', 0)];
  // A page past the end has the last page as its previous one.
  if (skip > 0) links.push(link('prev', Math.max(0, Math.min(skip - limit, lastSkip))));
  if (skip + limit < total) links.push(link('next', skip + limit));
  links.push(link('last', lastSkip));
  headers.Link = links.join(', ');
  return headers;
}
