/* sanitizer.h — NST_TSAN is defined in ThreadSanitizer builds (gcc's
 * __SANITIZE_THREAD__, clang's __has_feature), for code that must do
 * something else under TSan. Header only; no state. */
#ifndef NOSTALL_COMMON_SANITIZER_H
#define NOSTALL_COMMON_SANITIZER_H

#if defined(__SANITIZE_THREAD__)
#define NST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NST_TSAN 1
#endif
#endif

#endif
