/* sova — symbol visibility. The library builds with -fvisibility=hidden; only
 * declarations marked SOVA_API are exported from the shared library. */
#ifndef SOVA_EXPORT_H
#define SOVA_EXPORT_H

#if defined(SOVA_STATIC_BUILD) || !defined(__GNUC__)
#define SOVA_API
#else
#define SOVA_API __attribute__((visibility("default")))
#endif

#endif /* SOVA_EXPORT_H */
