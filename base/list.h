/*
 * Intrusive doubly linked lists (the core's queues: posted receives,
 * unexpected messages, pending frames, communicators, collective queues).
 */
#ifndef HC_LIST_H
#define HC_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct hc_list {
    struct hc_list *prev, *next;
} hc_list_t;

static inline void hc_list_init(hc_list_t *h)
{
    h->prev = h->next = h;
}
static inline bool hc_list_empty(const hc_list_t *h)
{
    return h->next == h;
}
static inline void hc_list_push_back(hc_list_t *h, hc_list_t *e)
{
    e->prev = h->prev;
    e->next = h;
    h->prev->next = e;
    h->prev = e;
}
static inline void hc_list_del(hc_list_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = e;
}
#define hc_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define hc_list_foreach_safe(pos, tmp, head)                                                       \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

/* Singly linked FIFOs of any element type with a `next` pointer, in any
 * queue struct with `head` and `tail` (the drivers' transmit queues). */
#define HC_FIFO_PUSH(q, e)                                                                         \
    do {                                                                                           \
        (e)->next = NULL;                                                                          \
        if ((q)->tail)                                                                             \
            (q)->tail->next = (e);                                                                 \
        else                                                                                       \
            (q)->head = (e);                                                                       \
        (q)->tail = (e);                                                                           \
    } while (0)
/* Keeps, in order, the elements for which `drop` (an expression of the loop
 * variable e) is false; drop may free e (e->next is read before it). */
#define HC_FIFO_FILTER(q, e, drop)                                                                 \
    do {                                                                                           \
        __typeof__((q)->head) h_ = NULL, t_ = NULL, n_;                                            \
        for ((e) = (q)->head; (e); (e) = n_) {                                                     \
            n_ = (e)->next;                                                                        \
            if (drop) continue;                                                                    \
            (e)->next = NULL;                                                                      \
            if (t_)                                                                                \
                t_->next = (e);                                                                    \
            else                                                                                   \
                h_ = (e);                                                                          \
            t_ = (e);                                                                              \
        }                                                                                          \
        (q)->head = h_;                                                                            \
        (q)->tail = t_;                                                                            \
    } while (0)
/* The first element, removed (NULL when empty). */
#define HC_FIFO_POP(q)                                                                             \
    __extension__({                                                                                \
        __typeof__((q)->head) e_ = (q)->head;                                                      \
        if (e_) {                                                                                  \
            (q)->head = e_->next;                                                                  \
            if (!(q)->head)                                                                        \
                (q)->tail = NULL;                                                                  \
        }                                                                                          \
        e_;                                                                                        \
    })

#endif /* HC_LIST_H */
