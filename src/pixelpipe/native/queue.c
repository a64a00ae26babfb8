/* A decode queue: one native thread per nvImageCodec decoder that decodes the batches it is
handed, in order, back to back (see decode/nvimgcodec_c.py, CDecoder with ahead=True).

Why: in a Pipeline, the Python thread that called the decode had to take the GIL back after
each batch before it could start the next one, and another of the Pipeline's threads could hold
the GIL for up to the interpreter's switch interval (5 ms) each time: the decoder stood idle
for a third of a batch (measured on a 16-core H100 host). Here a batch is queued when it is
planned, and this thread starts it as soon as the previous one is done, without Python.

The thread calls the batch function it was handed (native/decode.c's pp_decode_batch), then
records the job's CUDA event on the job's stream (cudaEventRecord), so that a consumer's stream
can wait for exactly this batch's pixels while the next batch is already decoding on the same
stream. It first makes the decoder's device current (cudaSetDevice), as the calling Python
thread had it. Everything is handed over as function pointers (this file links to nothing but
pthreads); a stand-in batch function makes it testable without a GPU.

A job belongs to its submitter: pp_queue_wait() waits for it and gives its result,
pp_queue_retire() takes it back (a queued job is cancelled, a running one waited for) and frees
it. pp_queue_stop() cancels what is queued; every job must be retired before
pp_queue_destroy(). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef int (*batch_t)(void *decoder, void **streams, void **images, int n, const void *params,
                       uint32_t *status, size_t *count, double *times, int *failure);
typedef int (*set_device_t)(int device);
typedef int (*record_t)(void *event, void *stream);

enum { QUEUED, RUNNING, DONE, CANCELLED };

/* results beyond pp_decode_batch's 0-3 */
#define PP_CANCELLED (-1) /* the job was taken back, or the queue stopped, before it ran */
#define PP_RECORD_FAILED 4 /* cudaEventRecord failed (*failure: its error) */
#define PP_DEVICE_FAILED 5 /* cudaSetDevice failed on the queue's thread (*failure: its error) */

typedef struct pp_job {
    void *decoder;
    void **streams;
    void **images;
    int n;
    const void *params;
    uint32_t *status;
    size_t *count;
    double *times;
    int *failure;
    void *event; /* NULL: no event is recorded */
    void *stream;
    int state;
    int result;
    struct pp_job *next;
} pp_job;

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was queued, or the queue is stopping */
    pthread_cond_t done; /* a job finished or was cancelled */
    pp_job *head, *tail;
    int stop;
    int device;
    batch_t batch;
    set_device_t set_device;
    record_t record;
} pp_queue;

static void *worker(void *arg)
{
    pp_queue *q = (pp_queue *)arg;
    int device_rc = q->set_device ? q->set_device(q->device) : 0;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop)
            pthread_cond_wait(&q->work, &q->mu);
        if (!q->head)
            break; /* stopping, nothing queued */
        pp_job *j = q->head;
        q->head = j->next;
        if (!q->head)
            q->tail = NULL;
        j->next = NULL;
        j->state = RUNNING;
        pthread_mutex_unlock(&q->mu);
        int rc;
        if (device_rc != 0) {
            *j->failure = device_rc;
            rc = PP_DEVICE_FAILED;
        } else {
            rc = q->batch(j->decoder, j->streams, j->images, j->n, j->params, j->status, j->count, j->times,
                          j->failure);
            if (j->event && q->record) { /* even after a failure: a waiting stream must not hang */
                int r = q->record(j->event, j->stream);
                if (r != 0 && rc == 0) {
                    *j->failure = r;
                    rc = PP_RECORD_FAILED;
                }
            }
        }
        pthread_mutex_lock(&q->mu);
        j->result = rc;
        j->state = DONE;
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void free_queue(pp_queue *q)
{
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->work);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* batch: pp_decode_batch; set_device: cudaSetDevice (or NULL); record: cudaEventRecord (or
   NULL: no events). Returns NULL where the thread cannot be started. */
pp_queue *pp_queue_create(void *batch, void *set_device, void *record, int device)
{
    pp_queue *q = (pp_queue *)calloc(1, sizeof(pp_queue));
    if (!q)
        return NULL;
    q->batch = (batch_t)batch;
    q->set_device = (set_device_t)set_device;
    q->record = (record_t)record;
    q->device = device;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->done, NULL);
    if (pthread_create(&q->thread, NULL, worker, q) != 0) {
        free_queue(q);
        return NULL;
    }
    return q;
}

/* Queue a batch: pp_decode_batch's arguments (the caller keeps them alive until the job is
   retired), then the CUDA event to record on `stream` once it is decoded (or NULL). Returns the
   job, or NULL (out of memory, or the queue is stopping). */
pp_job *pp_queue_submit(pp_queue *q, void *decoder, void **streams, void **images, int n, const void *params,
                        uint32_t *status, size_t *count, double *times, int *failure, void *event, void *stream)
{
    pp_job *j = (pp_job *)calloc(1, sizeof(pp_job));
    if (!j)
        return NULL;
    j->decoder = decoder;
    j->streams = streams;
    j->images = images;
    j->n = n;
    j->params = params;
    j->status = status;
    j->count = count;
    j->times = times;
    j->failure = failure;
    j->event = event;
    j->stream = stream;
    j->state = QUEUED;
    pthread_mutex_lock(&q->mu);
    if (q->stop) {
        pthread_mutex_unlock(&q->mu);
        free(j);
        return NULL;
    }
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    return j;
}

/* Waits for the job; returns pp_decode_batch's result (0, or the step that failed), 4 or 5
   above, or -1 where it was cancelled. */
int pp_queue_wait(pp_queue *q, pp_job *j)
{
    pthread_mutex_lock(&q->mu);
    while (j->state == QUEUED || j->state == RUNNING)
        pthread_cond_wait(&q->done, &q->mu);
    int rc = j->state == CANCELLED ? PP_CANCELLED : j->result;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

/* Takes the job back and frees it: a queued job is cancelled (never runs), a running one is
   waited for. Returns 1 where it was cancelled here, else 0. */
int pp_queue_retire(pp_queue *q, pp_job *j)
{
    int cancelled = 0;
    pthread_mutex_lock(&q->mu);
    if (j->state == QUEUED) {
        pp_job *prev = NULL, *at = q->head;
        while (at && at != j) {
            prev = at;
            at = at->next;
        }
        if (at) {
            if (prev)
                prev->next = j->next;
            else
                q->head = j->next;
            if (q->tail == j)
                q->tail = prev;
        }
        j->state = CANCELLED;
        cancelled = 1;
        pthread_cond_broadcast(&q->done);
    }
    while (j->state == RUNNING)
        pthread_cond_wait(&q->done, &q->mu);
    pthread_mutex_unlock(&q->mu);
    free(j);
    return cancelled;
}

/* Stops taking jobs: queued ones are cancelled (their submitters still retire them), a running
   one finishes. */
void pp_queue_stop(pp_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    for (pp_job *j = q->head; j; j = j->next)
        j->state = CANCELLED;
    q->head = q->tail = NULL;
    pthread_cond_broadcast(&q->work);
    pthread_cond_broadcast(&q->done);
    pthread_mutex_unlock(&q->mu);
}

/* pp_queue_stop, then joins the thread and frees the queue (every job retired before). */
void pp_queue_destroy(pp_queue *q)
{
    pp_queue_stop(q);
    pthread_join(q->thread, NULL);
    free_queue(q);
}
