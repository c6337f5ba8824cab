"""Texts written for these tests: two topics in English, two in Korean."""

EN_QUEUE = (
    "A job queue stores background work in a database table. "
    "Each worker claims a job by updating its row inside a transaction. "
    "PostgreSQL offers FOR UPDATE SKIP LOCKED, so many workers can claim jobs without "
    "blocking each other. "
    "A lease with an expiry brings a job back when its worker dies. "
    "The claim token stops an old worker from overwriting the result of a new one. "
    "The weather was nice that day."
)
EN_QUEUE_2 = (
    "Workers pull jobs from a queue stored in PostgreSQL. A transaction locks the job row so "
    "that two workers never claim the same job. Expired leases return stuck jobs to the queue."
)
EN_BREAD = (
    "To bake bread, mix flour, water, salt and yeast into a dough. Knead the dough for ten "
    "minutes until it is smooth. Let the dough rise in a warm place for an hour, then shape "
    "the loaf. Bake the loaf in a hot oven until the crust is golden brown."
)
KO_QUEUE = (
    "작업 큐는 데이터베이스 테이블에 백그라운드 작업을 저장합니다. "
    "각 워커는 트랜잭션 안에서 작업 행을 갱신하여 작업을 가져갑니다. "
    "PostgreSQL은 여러 워커가 서로를 막지 않고 작업을 가져가도록 SKIP LOCKED를 제공합니다. "
    "워커가 죽으면 만료된 임대가 작업을 다시 큐로 돌려보냅니다. "
    "그날은 날씨가 좋았다."
)
KO_QUEUE_2 = (
    "워커는 데이터베이스에 저장된 작업 큐에서 작업을 꺼냅니다. "
    "트랜잭션은 작업 행을 잠가서 두 워커가 같은 작업을 가져가지 못하게 합니다."
)
KO_BREAD = (
    "빵을 만들려면 밀가루와 물, 소금, 효모를 섞어 반죽을 만듭니다. "
    "반죽을 십 분 동안 치대어 매끄럽게 만듭니다. "
    "따뜻한 곳에서 한 시간 동안 반죽을 부풀린 뒤 모양을 잡습니다. "
    "뜨거운 오븐에서 껍질이 노릇해질 때까지 굽습니다."
)
