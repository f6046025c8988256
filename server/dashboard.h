/*
 * The dashboard's files (server/dashboard/), compiled into dsjobd as static
 * data by server/dashboard/embed.sh at build time: http.c serves them at
 * /, /dashboard.css and /dashboard.js. Each array ends with a NUL that its
 * _len leaves out, so the page is also a C string.
 */
#ifndef DSJOB_SERVER_DASHBOARD_H
#define DSJOB_SERVER_DASHBOARD_H

#include <stddef.h>

extern const unsigned char dashboard_html[]; /* index.html; "@TOKEN@" marks the CSRF token */
extern const size_t dashboard_html_len;      /* its bytes, without the NUL */
extern const unsigned char dashboard_css[];  /* dashboard.css */
extern const size_t dashboard_css_len;       /* its bytes, without the NUL */
extern const unsigned char dashboard_js[];   /* dashboard.js */
extern const size_t dashboard_js_len;        /* its bytes, without the NUL */

#endif
