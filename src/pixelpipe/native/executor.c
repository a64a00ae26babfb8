/* A thread pool for nvImageCodec's per-sample tasks (its nvimgcodecExecutorDesc_t), used by a
decoder instead of nvImageCodec's default executor where PIXELPIPE_NVIMGCODEC_EXECUTOR=pixelpipe
(decode/nvimgcodec_executor.py).

Why: nvImageCodec's decode call alone decodes rn50's regions 5-8% slower than DALI's use of the
same library on one machine (docs/benchmarks.md), and one of the two differences left is that
DALI hands nvImageCodec an executor of its own: its thread pool, which starts each task as soon
as it is scheduled. This pool does the same, so that the two can be timed against each other.

Semantics (nvimgcodec.h 0.9): schedule() queues a task and wakes a worker at once; run() has
nothing left to start; wait() blocks until every task scheduled so far has finished. A task is
called as task(thread_id, sample_idx, context) with the worker's index in [0, threads), which
nvImageCodec uses to pick per-thread state. Each worker first makes the decoder's device current
(cudaSetDevice, handed over as a function pointer: this file links to nothing but pthreads).
Tasks run in the order they were scheduled. wait() must not be called from a task (nvImageCodec
calls it from the thread that called the decode). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

typedef void (*task_t)(int thread_id, int sample_idx, void *context);
typedef int (*set_device_t)(int device);

#define PP_OK 0               /* NVIMGCODEC_STATUS_SUCCESS */
#define PP_EXECUTION_FAILED 6 /* NVIMGCODEC_STATUS_EXECUTION_FAILED: out of memory queueing a task */

typedef struct {
    task_t fn;
    int sample;
    void *context;
} pp_task;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a task was queued, or the pool is stopping */
    pthread_cond_t idle; /* the queue emptied and no task runs */
    pp_task *ring;
    size_t cap, head, count; /* queued tasks: ring[(head + k) % cap], k < count */
    int busy;                /* tasks running */
    int stop;
    int threads, started;
    int device;
    set_device_t set_device;
    pthread_t *workers;
    long long done; /* tasks finished since the pool was made (pp_executor_done) */
} pp_executor;

typedef struct {
    pp_executor *pool;
    int id;
} worker_arg;

static void *worker(void *arg)
{
    pp_executor *p = ((worker_arg *)arg)->pool;
    int id = ((worker_arg *)arg)->id;
    free(arg);
    if (p->set_device)
        p->set_device(p->device);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->count && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->count)
            break; /* stopping, nothing queued */
        pp_task t = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        p->busy++;
        pthread_mutex_unlock(&p->mu);
        t.fn(id, t.sample, t.context);
        pthread_mutex_lock(&p->mu);
        p->busy--;
        p->done++;
        if (!p->count && !p->busy)
            pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void stop_and_free(pp_executor *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p->ring);
    free(p);
}

/* threads workers on CUDA device `device` (set_device: cudaSetDevice, or NULL). NULL where the
   memory or a thread cannot be had. */
pp_executor *pp_executor_create(int threads, int device, void *set_device)
{
    if (threads < 1)
        return NULL;
    pp_executor *p = (pp_executor *)calloc(1, sizeof(pp_executor));
    if (!p)
        return NULL;
    p->threads = threads;
    p->device = device;
    p->set_device = (set_device_t)set_device;
    p->cap = 256;
    p->ring = (pp_task *)malloc(p->cap * sizeof(pp_task));
    p->workers = (pthread_t *)calloc((size_t)threads, sizeof(pthread_t));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    if (!p->ring || !p->workers) {
        stop_and_free(p);
        return NULL;
    }
    for (int i = 0; i < threads; i++) {
        worker_arg *a = (worker_arg *)malloc(sizeof(worker_arg));
        if (!a || (a->pool = p, a->id = i, pthread_create(&p->workers[i], NULL, worker, a) != 0)) {
            free(a);
            stop_and_free(p);
            return NULL;
        }
        p->started++;
    }
    return p;
}

/* nvimgcodecExecutorDesc_t's schedule: queue the task, a worker starts it at once. */
int pp_executor_schedule(void *instance, int device_id, int sample_idx, void *context, void *task)
{
    (void)device_id;
    pp_executor *p = (pp_executor *)instance;
    pthread_mutex_lock(&p->mu);
    if (p->count == p->cap) { /* grow: unroll the ring into a buffer twice as large */
        pp_task *grown = (pp_task *)malloc(2 * p->cap * sizeof(pp_task));
        if (!grown) {
            pthread_mutex_unlock(&p->mu);
            return PP_EXECUTION_FAILED;
        }
        for (size_t k = 0; k < p->count; k++)
            grown[k] = p->ring[(p->head + k) % p->cap];
        free(p->ring);
        p->ring = grown;
        p->head = 0;
        p->cap *= 2;
    }
    p->ring[(p->head + p->count) % p->cap] = (pp_task){(task_t)task, sample_idx, context};
    p->count++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return PP_OK;
}

/* nvimgcodecExecutorDesc_t's run: every task started when it was scheduled. */
int pp_executor_run(void *instance, int device_id)
{
    (void)instance;
    (void)device_id;
    return PP_OK;
}

/* nvimgcodecExecutorDesc_t's wait: until no task is queued or running. */
int pp_executor_wait(void *instance, int device_id)
{
    (void)device_id;
    pp_executor *p = (pp_executor *)instance;
    pthread_mutex_lock(&p->mu);
    while (p->count || p->busy)
        pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return PP_OK;
}

/* nvimgcodecExecutorDesc_t's getNumThreads */
int pp_executor_threads(void *instance)
{
    return ((pp_executor *)instance)->threads;
}

/* tasks finished since the pool was made */
long long pp_executor_done(void *instance)
{
    pp_executor *p = (pp_executor *)instance;
    pthread_mutex_lock(&p->mu);
    long long done = p->done;
    pthread_mutex_unlock(&p->mu);
    return done;
}

/* Finish the queued tasks, stop and join the workers, free the pool (after the decoder that
   used it is destroyed). */
void pp_executor_destroy(void *instance)
{
    if (instance)
        stop_and_free((pp_executor *)instance);
}
